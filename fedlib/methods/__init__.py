"""Methods: every class decorated with ``@register`` (fedlib.methods.registry); importing this package
registers the ones fedlib ships, in the order their papers' tables list them."""
from fedlib.methods.apfl import APFL
from fedlib.methods.base import Method
from fedlib.methods.ccvr import CCVR
from fedlib.methods.creff import CReFF
from fedlib.methods.ditto import Ditto
from fedlib.methods.fedala import FedALA
from fedlib.methods.fedasam import FedASAM
from fedlib.methods.fedavg import FedAvg
from fedlib.methods.fedavg_ft import FedAvgFT
from fedlib.methods.fedbabu import FedBABU
from fedlib.methods.feddc import FedDC
from fedlib.methods.feddecorr import FedDecorr
from fedlib.methods.fedetf import FedETF
from fedlib.methods.fedfa import FedFA
from fedlib.methods.fedfomo import FedFomo
from fedlib.methods.fedgpa import FedGPA
from fedlib.methods.fedic import FEDIC
from fedlib.methods.fedmate import FedMate
from fedlib.methods.fedntd import FedNTD
from fedlib.methods.fedpac import FedPAC
from fedlib.methods.fedpcl import FedPCL
from fedlib.methods.fedper import FedPer
from fedlib.methods.fedperpp import FedPerPlus
from fedlib.methods.fedphp import FedPHP
from fedlib.methods.fedproc import FedProc
from fedlib.methods.fedproto import FedProto
from fedlib.methods.fedprox import FedProx
from fedlib.methods.fedprp import FedPRP
from fedlib.methods.fedrep import FedRep
from fedlib.methods.fedrod import FedRoD
from fedlib.methods.fedsoup import FedSoup
from fedlib.methods.grace import GRACE
from fedlib.methods.lg_fedavg import LGFedAvg
from fedlib.methods.local import Local
from fedlib.methods.moon import Moon
from fedlib.methods.perfedavg import PerFedAvg
from fedlib.methods.pfedcspc import PFedCSPC
from fedlib.methods.pfedme import PFedMe
from fedlib.methods.registry import METHODS, make_method, register, secure_aggregation_groups
from fedlib.methods.scaffold import Scaffold

__all__ = [
    "METHODS",
    "Method",
    "make_method",
    "register",
    "secure_aggregation_groups",
    "Local",
    "FedAvg",
    "FedAvgFT",
    "FedProx",
    "Scaffold",
    "Moon",
    "Ditto",
    "FedPer",
    "LGFedAvg",
    "FedRep",
    "FedBABU",
    "FedProto",
    "FedPAC",
    "FedGPA",
    "PFedMe",
    "PerFedAvg",
    "FedPCL",
    "FedPRP",
    "APFL",
    "FedRoD",
    "FedPHP",
    "CReFF",
    "FEDIC",
    "FedMate",
    "FedFA",
    "PFedCSPC",
    "FedNTD",
    "FedDecorr",
    "FedProc",
    "FedDC",
    "FedASAM",
    "CCVR",
    "FedALA",
    "FedFomo",
    "FedSoup",
    "GRACE",
    "FedPerPlus",
    "FedETF",
]
