"""The daemon's side of the training hook: receivers (`server`) and per-rank state (`ranks`)."""
