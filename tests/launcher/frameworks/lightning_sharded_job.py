# PyTorch Lightning's sharding strategy on CPU, unchanged: ModelParallelStrategy with FSDP2's fully_shard over
# its data-parallel mesh (Lightning's FSDPStrategy refuses CPU: "requires a GPU accelerator"). Each rank must
# hold half of every sharded parameter. Usage: lightning_sharded_job.py OUT
import sys

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard

from common import report
from lightning_common import Regression, fit


class Sharded(Regression):
    def configure_model(self):
        fully_shard(self.net, mesh=self.device_mesh["data_parallel"])


torch.manual_seed(0)
model = Sharded(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
trainer = fit(model, ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1))
shard = model.net[0].weight
local_rows = shard.to_local().shape[0] if hasattr(shard, "to_local") else shard.shape[0]
full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
report(sys.argv[1], "lightning_sharded", trainer.global_rank, trainer.world_size, full,
       environment=type(trainer.strategy.cluster_environment).__name__, steps=trainer.global_step,
       local_rows=local_rows)
