"""What meshrun's `torchrun.handlers` entry point names (pyproject.toml). torch's registry loads it while
torch.distributed.elastic.rendezvous is still being imported, calls it with no arguments, and registers what
it returns as the creator of `--rdzv-backend etcd-v3` handlers. So this module imports nothing of torch: the
rest of the package is imported when torchrun makes its handler.
"""


def handler_creator():
    """The creator torch registers: RendezvousParameters -> RendezvousHandler."""
    return create_etcd_v3_handler


def create_etcd_v3_handler(params):
    from .handler import create_handler

    return create_handler(params)
