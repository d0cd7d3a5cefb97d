"""`coursekit.checks`, the name notebooks and scripts from before the split import it by
(`from coursekit import checks` is every stub's setup cell): the same module object as
`coursekit.learner.checks`, under both names."""
import sys

from coursekit.learner import checks

sys.modules[__name__] = checks
