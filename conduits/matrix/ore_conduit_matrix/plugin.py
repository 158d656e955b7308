"""The pluggy plugin (entry point `ore: matrix = "ore_conduit_matrix.plugin"`)."""
