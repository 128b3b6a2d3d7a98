"""Datasets in memory (``sources``; composites such as digit4 register themselves), partitions, federated data."""
from fedlib.data.domains import digit_domains  # importing domains registers the composite dataset digit4
from fedlib.data.federated import FederatedData, federate
from fedlib.data.partition import PARTITIONERS, partition
from fedlib.data.sources import SOURCES, Dataset, dataset_names, load_dataset

__all__ = ["FederatedData", "federate", "PARTITIONERS", "partition", "SOURCES", "Dataset", "load_dataset",
           "dataset_names", "digit_domains"]
