from layerprof.cli import entry

entry()
