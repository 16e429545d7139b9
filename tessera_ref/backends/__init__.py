"""Executors behind one seam (DESIGN §13): the Backend and Communicator interfaces, the registry."""
