"""The compiled CPU backend: a graph becomes one C file calling a hand-written kernel library
(`runtime/`), compiled with the system C compiler and loaded with ctypes.

    exe = lowbit.backends.cpu.compile(graph, threads=2)   # or lowbit.compile(graph, "cpu")
    outputs = exe({"input": x})

Integer results equal the reference interpreter's bit for bit; float results agree within
float rounding (products' sums in double in k order, rounded once). See executable.py for
batch sizes and specialization, toolchain.py for the compiler and its cache, library.py for the
ISA choice ($LOWBIT_CPU_ISA) and threads.
"""

from lowbit.backends.cpu.executable import CpuExecutable, compile

__all__ = ["CpuExecutable", "compile"]
