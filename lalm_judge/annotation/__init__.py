"""The human-anchor study as a tool: a stratified annotation batch drawn from a finished run (`sample`, `batch`),
a local web app where raters listen to and rate its dialogues (`app`, storing ratings in SQLite via `store`),
and the export of the ratings joined with the hidden generated labels (`export`) for `lalm-judge anchors stats`.
"""
