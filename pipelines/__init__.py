"""One module per job: ``build_pipeline(options) -> beam.Pipeline`` and ``run(argv)``."""
