"""An example hybridbench plugin: the `margin` router and the `arith` task (see README.md)."""
