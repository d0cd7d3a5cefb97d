"""`coursekit.answers`, the name notebooks and scripts from before the split import it by
(`from coursekit import checks` is every stub's setup cell): the same module object as
`coursekit.learner.answers`, under both names."""
import sys

from coursekit.learner import answers

sys.modules[__name__] = answers
