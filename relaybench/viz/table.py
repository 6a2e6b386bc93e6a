"""The plain table view, :class:`Table` (defined in :mod:`relaybench._table`, at the bottom of the
package, since the lower layers return tables too; re-exported here for the views).

>>> from relaybench._table import Table as Low
>>> Table is Low
True
"""

from __future__ import annotations

from .._table import Table

__all__ = ["Table"]
