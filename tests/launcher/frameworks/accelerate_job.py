# Hugging Face Accelerate on CPU, unchanged: Accelerator() must see the 2-process job. Usage: accelerate_job.py OUT
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from common import report

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(1)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
steps = 0
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    steps += 1
accelerator.wait_for_everyone()
report(sys.argv[1], "accelerate", accelerator.process_index, accelerator.num_processes, model.parameters(),
       distributed_type=str(accelerator.distributed_type), steps=steps)
accelerator.end_training()
