// Placeholder until this executable is written.
print("not yet implemented")
