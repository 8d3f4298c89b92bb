"""BatchPPO, the TF Agents algorithm."""
