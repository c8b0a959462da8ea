# PyTorch Lightning's sharding strategy on CPU, unchanged: ModelParallelStrategy with FSDP2's fully_shard over
# its data-parallel mesh (Lightning's FSDPStrategy refuses CPU: "requires a GPU accelerator"). Each rank must
# hold half of every sharded parameter. Usage: lightning_sharded_job.py OUT
import sys

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset

from common import report


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def configure_model(self):
        fully_shard(self.body, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(1)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
trainer = L.Trainer(accelerator="cpu", devices=2, strategy=ModelParallelStrategy(data_parallel_size=2,
                    tensor_parallel_size=1), max_steps=6, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
model = Tiny()
trainer.fit(model, DataLoader(data, batch_size=4))
shard = model.body[0].weight
local_rows = shard.to_local().shape[0] if hasattr(shard, "to_local") else shard.shape[0]
full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
report(sys.argv[1], "lightning_sharded", trainer.global_rank, trainer.world_size, full,
       environment=type(trainer.strategy.cluster_environment).__name__, steps=trainer.global_step,
       local_rows=local_rows)
