"""Leaves every layer may use: names, Hub ids and errors, column names, checkpoint folders and history files."""
