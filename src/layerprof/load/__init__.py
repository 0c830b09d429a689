"""Sources of models: model files, ``--arch`` specs, input specs and the demo models
-> an ``nn.Module`` and its inputs, loaded safely (see SECURITY.md). Imports torch."""
