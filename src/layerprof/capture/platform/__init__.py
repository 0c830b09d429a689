"""Where a run happens: the clocks it reads (host, CUDA events; ``clocks``), the device
it runs on and moves the model to (``device``), the torchrun world and its wrappers
(``distributed``), and how busy the machine is (``hostload``)."""
