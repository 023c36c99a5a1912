"""Which rank goes where: Megatron's rank order, GPU sets per group, CPU binding, NIC choice, model
presets and factorization ranking, GPU selection for schedulers, clusters."""
