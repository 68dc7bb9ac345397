"""Fast native implementations of rope_ref's operations, installed as ``rope_ref.backends``.

Each adapter is its own module (``torch``, ``cupy``, ``array_api``) and imports its library lazily,
so importing this package never imports torch or cupy.
"""
