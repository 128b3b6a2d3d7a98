import os

os.environ.setdefault("TQDM_DISABLE", "1")
