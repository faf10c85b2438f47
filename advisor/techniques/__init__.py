"""One module per knob, and what binds them together.

Each technique answers three questions (``_base.Technique``):

* ``unavailable(value, hw)``: can this hardware do it? ``None`` if so, else the reason in
  words a user understands;
* ``apply(value, prepared)``: change the model / step setup (called by ``prepare.apply``);
* ``snippet(value)``: the plain-PyTorch lines a user would write instead.

- ``registry``: every technique, in apply order (``TECHNIQUES``);
- ``rules``: what cannot be combined or run as a workload (``conflicts``, ``refusal``),
  and what this hardware offers (``capability_table``);
- ``prepared``: ``Prepared``, the model set up for one configuration and its training /
  inference step (what each technique sets its part of);
- ``prepare``: ``apply(model, config)``, which builds it: the one code path trials and
  users share.

Adding a knob: a ``TrialConfig`` field and a value domain (``advisor.core.config``), a
module here with a ``Technique`` subclass, and an entry in ``registry``. The space, the
capability table, ``advisor hardware`` and export pick it up from there.
"""
