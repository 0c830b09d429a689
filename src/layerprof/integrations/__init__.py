"""Training frameworks' callbacks on the Recorder: Hugging Face ``Trainer``
(``integrations.hf``, extra ``layerprof[hf]``) and Lightning (``integrations.lightning``,
extra ``layerprof[lightning]``). Each module imports its framework; nothing here is
imported by the rest of layerprof.
"""
