"""The Recorder: every module's forward timed by a wrapper swapped in and out, backward by
autograd graph-node marks (``nodes``), a training loop's steps marked and partitioned
(``loop``), and the event log reduced after the run (``layertimes``).

The instrument every mode and the user's own loop use; the hooks *mode* (``capture.hooks``)
is one of its users.
"""
