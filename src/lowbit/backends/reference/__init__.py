"""The numpy reference interpreter: the exact definition of what every op computes."""

from lowbit.backends.reference.interpreter import Interpreter, NodeObserver

__all__ = ["Interpreter", "NodeObserver"]
