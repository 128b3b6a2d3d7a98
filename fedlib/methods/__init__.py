"""Method registry: name -> class. Each method states only what its paper changes."""
from fedlib.methods.apfl import APFL
from fedlib.methods.base import Method
from fedlib.methods.creff import CReFF
from fedlib.methods.ditto import Ditto
from fedlib.methods.fedavg import FedAvg
from fedlib.methods.fedavg_ft import FedAvgFT
from fedlib.methods.fedbabu import FedBABU
from fedlib.methods.fedfa import FedFA
from fedlib.methods.fedgpa import FedGPA
from fedlib.methods.fedic import FEDIC
from fedlib.methods.fedmate import FedMate
from fedlib.methods.fedpac import FedPAC
from fedlib.methods.fedpcl import FedPCL
from fedlib.methods.fedper import FedPer
from fedlib.methods.fedphp import FedPHP
from fedlib.methods.fedproto import FedProto
from fedlib.methods.fedprp import FedPRP
from fedlib.methods.fedprox import FedProx
from fedlib.methods.fedrep import FedRep
from fedlib.methods.fedrod import FedRoD
from fedlib.methods.lg_fedavg import LGFedAvg
from fedlib.methods.local import Local
from fedlib.methods.moon import Moon
from fedlib.methods.perfedavg import PerFedAvg
from fedlib.methods.pfedme import PFedMe
from fedlib.methods.scaffold import Scaffold
from fedlib.methods.ccvr import CCVR
from fedlib.methods.fedala import FedALA
from fedlib.methods.fedasam import FedASAM
from fedlib.methods.feddc import FedDC
from fedlib.methods.feddecorr import FedDecorr
from fedlib.methods.fedetf import FedETF
from fedlib.methods.fedfomo import FedFomo
from fedlib.methods.fedntd import FedNTD
from fedlib.methods.fedperpp import FedPerPlus
from fedlib.methods.fedproc import FedProc
from fedlib.methods.fedsoup import FedSoup
from fedlib.methods.grace import GRACE
from fedlib.methods.pfedcspc import PFedCSPC
from fedlib.errors import ConfigError

METHODS: dict[str, type[Method]] = {m.name: m for m in (
    Local, FedAvg, FedAvgFT, FedProx, Scaffold, Moon, Ditto, FedPer, LGFedAvg, FedRep, FedBABU, FedProto,
    FedPAC, FedGPA, PFedMe, PerFedAvg, FedPCL, FedPRP, APFL, FedRoD, FedPHP, CReFF, FEDIC, FedMate, FedFA,
    PFedCSPC, FedNTD, FedDecorr, FedProc, FedDC, FedASAM, CCVR, FedALA, FedFomo, FedSoup, GRACE, FedPerPlus, FedETF)}


def make_method(name: str, **hyper) -> Method:
    if name not in METHODS:
        raise ConfigError("method", name, f"one of {', '.join(METHODS)}")
    return METHODS[name](**hyper)
