"""PyTorch kernel profiling for servesim cost models (needs torch, numpy, pyyaml only)."""
