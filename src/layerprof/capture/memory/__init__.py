"""Device memory per layer, from the CUDA caching allocator's counters."""
