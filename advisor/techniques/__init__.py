"""One module per knob, and what binds them together.

Each technique answers three questions (``_base.Technique``):

* ``unavailable(value, hw)``: can this hardware do it? ``None`` if so, else the reason in
  words a user understands;
* ``apply(value, prepared)``: change the model / step setup (called by ``prepare.apply``);
* ``snippet(value)``: the plain-PyTorch lines a user would write instead.

- ``registry``: every technique in the one order ``apply`` runs them (``APPLY_ORDER``,
  grouped with each group's reason), and by knob name (``TECHNIQUES``);
- ``rules``: what cannot be combined or run as a workload (``conflicts``, ``refusal``),
  and what this hardware offers (``capability_table``);
- ``prepared``: ``Prepared``, the model set up for one configuration and its training /
  inference step (what each technique sets its part of);
- ``prepare``: ``apply(model, config)``, which builds it: the one code path trials and
  users share.

Adding a knob: one ``TrialConfig`` line, ``name: type = knob(default, domain)``
(``advisor.core.config``), a module here with a ``Technique`` subclass (``read_by`` set if
another knob's ``apply`` reads its value), and its place in ``registry.APPLY_ORDER``;
``tests/techniques/test_registry.py`` fails while the three disagree. The space, the
capability table, ``advisor hardware`` and export pick it up from there.
"""
