"""Sphinx extension: no sphinx-thebe scripts in the pages.

This book runs no live kernels (it is built offline, with executed notebooks). sphinx-thebe, which
Jupyter Book 1 always loads, adds its inline configuration script on every ``env-before-read-docs``,
and that event fires more than once per build: pages declared ``const THEBE_JS_URL`` twice and the
browser reported "Identifier 'THEBE_JS_URL' has already been declared". Its listener is removed."""


def setup(app):
    for event, listeners in app.events.listeners.items():
        listeners[:] = [l for l in listeners if getattr(l.handler, "__module__", "") != "sphinx_thebe"
                        or l.handler.__name__ not in ("init_thebe_core",)]
    return {"parallel_read_safe": True, "parallel_write_safe": True}
