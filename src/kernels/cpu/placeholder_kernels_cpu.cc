// placeholder until the module lands; keeps the library target non-empty.
