"""What a job starts with: NCCL/CUDA environment settings with reasons, and the launch artefacts
(torchrun, Slurm sbatch, Open MPI rankfile, per-rank wrapper)."""
