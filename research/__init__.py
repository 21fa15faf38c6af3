"""Studies apart from the product: each folder asks one question of the system, with its scripts, its own
RESULTS.md, results/ and README (question, command, answer). They import the package and `benchmarks`; nothing in
`mmrag` or `benchmarks` imports them. The dated log of how the defaults were reached is learning-log/README.md."""
