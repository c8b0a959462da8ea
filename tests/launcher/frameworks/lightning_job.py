# PyTorch Lightning, DDP on CPU, unchanged: under a torchrun-style launcher Lightning must detect the
# environment (TorchElasticEnvironment) and spawn nothing. Usage: lightning_job.py OUT
import sys

import torch

from common import report
from lightning_common import Regression, fit

torch.manual_seed(0)
model = Regression(torch.nn.Linear(8, 1))
trainer = fit(model, "ddp")
report(sys.argv[1], "lightning", trainer.global_rank, trainer.world_size, model.parameters(),
       environment=type(trainer.strategy.cluster_environment).__name__, steps=trainer.global_step)
