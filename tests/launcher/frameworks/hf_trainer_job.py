# The transformers Trainer on CPU, unchanged, with a model built from a config (no hub: HF_HUB_OFFLINE=1).
# Usage: hf_trainer_job.py OUT
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from common import report


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 64, (32, 16), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
model = LlamaForCausalLM(config)
args = TrainingArguments(output_dir=os.path.join(sys.argv[1], "hf_out"), max_steps=4,
                         per_device_train_batch_size=2, use_cpu=True, report_to=[], save_strategy="no",
                         logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0, seed=0)
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
trainer.train()
report(sys.argv[1], "hf_trainer", args.process_index, args.world_size, model.parameters(),
       parallel_mode=str(args.parallel_mode), steps=trainer.state.global_step)
