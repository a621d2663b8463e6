"""Tool ``blueprint``: render an experiment blueprint template, or validate one."""
