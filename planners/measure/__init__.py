"""Measurements with torch.distributed (``gpucomm bench``) fed back into a topology."""
