"""The Python API: ``advisor.tune(...)`` from a script or a notebook, with the pieces of
a model.py passed as callables (``tune.py``), turned into a model.py that trial processes
can import (``callables.py``), and a result to read and export (``result.py``)."""
