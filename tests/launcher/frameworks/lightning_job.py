# PyTorch Lightning, DDP on CPU, unchanged: under a torchrun-style launcher Lightning must detect the
# environment (TorchElasticEnvironment) and spawn nothing. Usage: lightning_job.py OUT
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from common import report


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(1)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=6, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
model = Tiny()
trainer.fit(model, DataLoader(data, batch_size=4))
report(sys.argv[1], "lightning", trainer.global_rank, trainer.world_size, model.parameters(),
       environment=type(trainer.strategy.cluster_environment).__name__, steps=trainer.global_step)
