"""The Recorder (``recorder``): every module's forward timed by a wrapper swapped in and out
(``wrappers``), backward by autograd graph-node marks (``nodes``), a training loop's steps
marked and partitioned (``training``, ``loop``), and the event log reduced after the run
(``layertimes``) into one of three accumulators (``accumulators``), corrected for the
wrappers' calibrated cost (``calibration``).

The instrument every mode and the user's own loop use; the hooks *mode* (``capture.hooks``)
is one of its users.
"""
