import numpy as np
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from fedlib.metrics import accuracy, confusion, group_accuracy, i_local, macro_f1


def test_metrics_match_scikit_learn():
    rng = np.random.default_rng(0)
    for trial in range(20):
        y = rng.integers(0, 6, 200)
        pred = np.where(rng.random(200) < 0.6, y, rng.integers(0, 8, 200))  # classes 6, 7 only predicted
        if trial % 3 == 0:
            y[y == 2] = 3  # a class absent from y_true
        C = confusion(torch.as_tensor(y), torch.as_tensor(pred), 8)
        assert (C == confusion_matrix(y, pred, labels=range(8))).all()
        assert np.isclose(accuracy(C), accuracy_score(y, pred))
        assert np.isclose(macro_f1(C), f1_score(y, pred, average="macro"))
        a, f = accuracy_score(y, pred), f1_score(y, pred, average="macro")
        assert np.isclose(i_local(C), 2 * a * f / (a + f))


def test_group_accuracy():
    C = np.array([[5, 5, 0], [0, 10, 0], [1, 1, 8]])
    assert group_accuracy(C, np.array([0, 2])) == (5 + 8) / (10 + 10)


def test_frequency_groups_split_classes_by_training_count_20_30_50():
    """10 classes: the 2 most frequent are Many, the next 3 Medium, the other 5 Few (FedPRP Sec. V-A-3);
    ties keep class order."""
    from fedlib.metrics import frequency_groups

    counts = np.array([5, 90, 7, 60, 7, 30, 1, 2, 40, 3])
    groups = frequency_groups(counts)
    assert groups["many"].tolist() == [1, 3]
    assert groups["medium"].tolist() == [2, 5, 8]
    assert groups["few"].tolist() == [0, 4, 6, 7, 9]
