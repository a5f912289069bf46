"""The CI bot: comparing benchmark runs, commenting on pull requests, opening optimization
pull requests (``maxcode compare``, ``maxcode comment``, ``maxcode pr``)."""
