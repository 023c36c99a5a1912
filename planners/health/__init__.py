"""What is wrong with a node: ``doctor``'s rules and ``diff`` between nodes."""
