"""What runs inside the grader's sandbox: `runner` (the program: the cells, then the
probe) and `cells` (reading a cell's IPython syntax as Python, which the grader outside
also uses to read notebooks). Only the standard library, IPython's input transformer
and `coursekit.learner` may be imported here: these files, with the learner edition of
the library, are the whole of the sandbox's zip (`grader/edition.py`).
"""
