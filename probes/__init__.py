"""probe -> record -> topology: discovery (``sources``), readers of recorded output (``formats``),
the document (``model``), its facts and units, and the typed view planners read."""
