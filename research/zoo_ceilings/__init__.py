"""What training can reach with the tiny zoo: oracle queries and oracle selections. See README.md."""
