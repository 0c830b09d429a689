"""Per-layer rows for models whose forward hooks never fire: TorchScript and torch.export."""
