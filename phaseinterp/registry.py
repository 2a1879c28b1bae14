"""A named registry of records (gate kinds, layouts, model families): one way to add an entry, to
look one up and to take one out again, with the errors docs/errors.md lists."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of type `kind` by their `.name`.

    Args:
        kind: the record type an entry must be.
        noun: how errors name an entry ("gate kind").
        arg: the argument name of `register`'s errors ("kind").
        field: the config field a lookup error names ("gate").
    """

    def __init__(self, kind: type, noun: str, arg: str, field: str):
        self.kind, self.noun, self.arg, self.field = kind, noun, arg, field
        self.entries: dict[str, T] = {}

    def register(self, entry: T) -> T:
        """Add `entry` (a name already taken raises ValueError); returns it."""
        if not isinstance(entry, self.kind):
            raise ValueError(f"{self.arg}={entry!r} is invalid: allowed a {self.kind.__name__}")
        if entry.name in self.entries:
            raise ValueError(f"{self.noun} {entry.name!r} is already registered: allowed a new name, not one of "
                             f"{list(self.entries)}")
        self.entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> T:
        """Remove the entry called `name` and return it (ValueError listing the names otherwise)."""
        entry = self.get(name)
        del self.entries[name]
        return entry

    @contextmanager
    def registered(self, entry: T) -> Iterator[T]:
        """`register(entry)` for the duration of a `with` block (tests, temporary user entries)."""
        self.register(entry)
        try:
            yield entry
        finally:
            self.entries.pop(entry.name, None)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self.entries.values()))

    def get(self, name: str) -> T:
        """The entry called `name`; ValueError listing the registered names otherwise."""
        try:
            return self.entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.field}={name!r} is invalid: allowed one of {list(self.entries)}") from None


__all__ = ["Registry"]
