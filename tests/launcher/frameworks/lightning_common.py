"""What both Lightning jobs share: a small regression module over `self.net` (set by each job), its data
and the trainer's settings (CPU, 2 devices, 6 steps, no logger, checkpoints or progress bar)."""
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(model, strategy):
    """Trains `model` 6 steps with `strategy` on the same data every job sees; returns the trainer."""
    torch.manual_seed(1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=6, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=4))
    return trainer
