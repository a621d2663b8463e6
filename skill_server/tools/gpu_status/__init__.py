"""Tool ``gpu_status``: every GPU's memory, utilisation and processes on a set of hosts."""
