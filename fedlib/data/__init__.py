from fedlib.data.federated import FederatedData, federate
from fedlib.data.partition import PARTITIONERS, partition
from fedlib.data.sources import SOURCES, Dataset, load_dataset

__all__ = ["FederatedData", "federate", "PARTITIONERS", "partition", "SOURCES", "Dataset", "load_dataset"]
