"""The machine a trial runs on, and how it is measured there.

- ``hardware``: devices and software (``detect``), the fingerprint a study stores;
- ``timing``: the step timer (warm-up excluded, blocks of steps, median and spread);
- ``memory``: peak memory of the configuration (CUDA allocator, or the process's VmHWM);
- ``nvml``: GPU telemetry sampled during a trial;
- ``device_idle``: before measuring on a GPU, wait until no other process holds it.
"""
