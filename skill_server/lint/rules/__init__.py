"""The rules. Importing this package registers every rule, in the order the reference page lists them."""

from skill_server.lint.rules import split, kwargs, writes, budgets, base, cap, refusal  # noqa: F401  (registration)
