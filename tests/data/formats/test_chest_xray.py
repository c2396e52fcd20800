"""The chest X-ray table readers (CheXpert, NIH ChestX-ray14, MIMIC-CXR-JPG) on small fixture datasets written in each
one's published layout (conftest.py), and each one's bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from dpmed.data import SplitPlan
from dpmed.data.formats.chest_xray import CHEXPERT_FINDINGS, read_chexpert, read_mimic, read_nih
from dpmed.data.manifest import describe_demographics
from dpmed.errors import DataError

# --- CheXpert -------------------------------------------------------------------------------------------------------


def test_chexpert_uncertain_and_blank_policy(chexpert):
    zeros = read_chexpert(chexpert)
    ones = read_chexpert(chexpert, uncertain="ones")
    assert zeros.task.label_names == ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
    edema = zeros.task.label_names.index("Edema")
    # patient00001..04 write Edema as 0.0, -1.0, blank, 1.0 (p % 4 = 1, 2, 3, 0); patient00003 has two studies
    first_studies = [0, 1, 2, 4]
    assert zeros.labels[first_studies, edema].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert ones.labels[first_studies, edema].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert zeros.notes["uncertain_policy"] == "-1 -> zeros" and zeros.notes["blank_policy"].startswith("blank -> 0")
    assert zeros.patient_ids[0] == "patient00001" and zeros.sex[0] == "female" and zeros.age[0] == 41
    assert zeros.paths[0] == chexpert / "train" / "patient00001" / "study1" / "view1_frontal.jpg"
    assert (zeros.splits == "val").sum() == 4


def test_chexpert_paths_name_the_release_folder_whatever_the_folder_is_called_here(chexpert):
    """Path starts with the release's folder (CheXpert-v1.0-small/...) however the user named the extracted one: the
    prefix is dropped, not looked for inside it, or every image would be a missing file."""
    moved = chexpert.rename(chexpert.parent / "chexpert")
    m = read_chexpert(moved)
    assert all(p.is_file() for p in m.paths) and m.paths[0] == moved / "train/patient00001/study1/view1_frontal.jpg"


def test_chexpert_paths_written_without_the_release_folder_are_read_under_the_root(chexpert):
    """A table whose Path column was rewritten to start at train/ (no release folder) names the same files."""
    table = chexpert / "train.csv"
    table.write_text(table.read_text().replace("CheXpert-v1.0-small/train/", "train/"))
    m = read_chexpert(chexpert)
    assert all(p.is_file() for p in m.paths) and m.paths[0] == chexpert / "train/patient00001/study1/view1_frontal.jpg"


def test_chexpert_path_at_the_download_folder_names_the_release_folder_inside_it(chexpert):
    """The release unpacks to CheXpert-v1.0-small/; data.path at the folder holding it said only "train.csv not
    found", not where it is."""
    with pytest.raises(DataError) as err:
        read_chexpert(chexpert.parent)
    assert str(err.value) == (f"table {chexpert.parent / 'train.csv'} not found; {chexpert} holds it: set data.path "
                              "to that folder")


def test_chexpert_an_unknown_uncertain_policy_or_views_is_refused_naming_the_choices(chexpert, load_layout):
    with pytest.raises(DataError, match=r"^uncertain must be one of \['ones', 'zeros'\], got 'maybe'$"):
        load_layout("chexpert", chexpert, uncertain="maybe")
    with pytest.raises(DataError, match=r"^views must be frontal or all, got 'lateral'$"):
        load_layout("chexpert", chexpert, views="lateral")


def test_chexpert_valid_csv_is_validation_and_test_is_carved_by_patient(chexpert, load_layout, no_patient_crosses):
    d = load_layout("chexpert", chexpert, split=SplitPlan(test_fraction=0.25), labels=("Edema", "Pleural Effusion"))
    assert d.task.kind == "multilabel" and d.task.label_names == ("Edema", "Pleural Effusion")
    assert len(d.val) == 4 and set(d.val.patient_ids) == {f"patient{p}" for p in range(64541, 64545)}
    assert no_patient_crosses(d) and len(d.train) + len(d.test) == 16
    assert d.train.labels.dtype == np.float32 and d.train.labels.shape[1] == 2


def test_chexpert_bad_values_and_unknown_findings(chexpert, load_layout):
    text = (chexpert / "train.csv").read_text().splitlines()
    cells = text[5].split(",")
    cells[5 + CHEXPERT_FINDINGS.index("Edema")] = "maybe"
    text[5] = ",".join(cells)
    (chexpert / "train.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match=r"(?s)1 of 20 rows .*train.csv line 6 \(CheXpert-v1.0-small/train/patient00004/"
                                        r"study1/view1_frontal.jpg\): Edema = 'maybe' in train.csv"):
        load_layout("chexpert", chexpert)
    with pytest.raises(DataError, match=r"data.labels names \['Pneumonnia'\], which are not findings of this dataset"):
        read_chexpert(chexpert, findings=["Pneumonnia"])


def test_a_finding_listed_twice_is_named_with_what_to_do(chexpert, load_layout):
    """Before: "CheXpert: labels list a finding twice: [...]", which left the user to find the repeated one."""
    with pytest.raises(DataError) as err:
        load_layout("chexpert", chexpert, labels=("Edema", "Atelectasis", "Edema"))
    assert str(err.value) == ("CheXpert: data.labels lists the finding(s) ['Edema'] more than once (['Edema', "
                              "'Atelectasis', 'Edema']); list each finding once")


def test_a_chexpert_path_without_a_patient_folder_is_flagged_not_made_its_own_patient(chexpert, load_layout,
                                                                                      write_image):
    """Each CheXpert image's patient is its patientNNNNN folder; a row without one would be a "patient" of its own,
    one unit for what may be one of a person's several images, while the card still says the patient is the unit."""
    write_image(chexpert / "train" / "extra" / "view1_frontal.jpg", level=90)
    lines = (chexpert / "train.csv").read_text().splitlines()
    lines.append(lines[1].replace("patient00001/study1", "extra"))
    (chexpert / "train.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"(?s)1 of 21 rows .*train.csv line 18 \(CheXpert-v1.0-small/train/extra/"
                                        r"view1_frontal.jpg\): Path '.*' has no patient<NNNNN> folder"):
        load_layout("chexpert", chexpert)
    d = load_layout("chexpert", chexpert, skip_invalid=True, split=SplitPlan(test_fraction=0.25))
    ids = np.concatenate([d.train.patient_ids, d.val.patient_ids, d.test.patient_ids])
    assert len(ids) == 20 and all(i.startswith("patient") for i in ids)


# --- NIH ChestX-ray14 ---------------------------------------------------------------------------------------------


def test_nih_findings_ages_folders_and_official_test_list(nih, load_layout, no_patient_crosses):
    m = read_nih(nih)
    assert m.task.kind == "multilabel" and len(m.task.label_names) == 14
    effusion, mass = m.task.label_names.index("Effusion"), m.task.label_names.index("Mass")
    row = list(m.ids).index("00000001_000.png")  # "Effusion|Mass"
    assert m.labels[row, effusion] == m.labels[row, mass] == 1 and m.labels[row].sum() == 2
    assert m.labels[list(m.ids).index("00000006_000.png")].sum() == 0  # "No Finding"
    assert np.isnan(m.age[list(m.ids).index("00000005_000.png")]) and m.notes["implausible_ages_set_unknown"] == 1
    assert m.paths[-1].parent == nih / "images_002" / "images"
    d = load_layout("nih", nih, labels=("Effusion", "Atelectasis"), split=SplitPlan(val_fraction=0.3))
    assert sorted(set(d.test.patient_ids)) == ["10", "11", "12"] and len(d.test) == 4
    assert no_patient_crosses(d) and d.source["split"]["published"] == ["test"]


def test_nih_unknown_finding_and_missing_image(nih, load_layout):
    text = (nih / "Data_Entry_2017.csv").read_text().replace("00000002_000.png,Atelectasis",
                                                              "00000002_000.png,Pneumonnia|Mass")
    (nih / "Data_Entry_2017.csv").write_text(text)
    (nih / "images_001" / "images" / "00000003_000.png").unlink()
    with pytest.raises(DataError) as err:
        load_layout("nih", nih)
    message = str(err.value)
    assert "2 of 15 rows cannot be used" in message
    assert "Data_Entry_2017.csv line 3 (00000002_000.png): Finding Labels 'Pneumonnia|Mass': ['Pneumonnia']" in message
    assert "line 4 (00000003_000.png): image file images/00000003_000.png does not exist" in message


def test_nih_split_list_line_without_a_row_is_refused_where_a_row_loses_its_split(nih):
    """A typo in test_list.txt: its row would be divided with the training rows instead of kept in test."""
    (nih / "test_list.txt").write_text((nih / "test_list.txt").read_text().replace("00000011_000", "0000011_000"))
    with pytest.raises(DataError, match=r"test_list.txt line 2: 0000011_000.png has no row in Data_Entry_2017.csv, "
                                        r"and the table has 1 row\(s\) in neither split list \(line 14: "
                                        r"00000011_000.png\), which the official split would then not hold; correct "
                                        r"the line to the Image Index it means, or add the row of 0000011_000.png to "
                                        r"Data_Entry_2017.csv"):
        read_nih(nih)


def test_nih_split_list_lines_without_a_row_are_counted_where_no_row_loses_its_split(nih, caplog):
    """A table cut to a subset of the release (the lists still name every image), or one list only: recorded and
    told, but not in the description, which goes to shareable files (with public lists it counts the table's rows)."""
    table = nih / "Data_Entry_2017.csv"
    table.write_text("".join(line for line in table.read_text().splitlines(keepends=True)
                             if not line.startswith("00000011_000.png")))
    m = read_nih(nih)
    assert len(m) == 14 and (m.splits == "test").sum() == 3
    assert m.notes["split_list_lines_without_row"] == {"count": 1, "first": ["test_list.txt line 2"]}
    assert "1 split list line(s) name images without a row" in caplog.text and "line" not in m.description
    (nih / "train_val_list.txt").unlink()
    (nih / "test_list.txt").write_text((nih / "test_list.txt").read_text().replace("00000010_000", "0000010_000"))
    m = read_nih(nih)
    assert m.notes["split_list_lines_without_row"]["count"] == 2 and (m.splits == "test").sum() == 2


def test_nih_split_lists_saved_by_a_windows_editor_keep_the_published_split(nih):
    """Notepad saves a list as UTF-8 with a byte-order mark and CRLF line ends: the mark made the first line name no
    image, so that image lost its published split (and the list's first line was told as a typo)."""
    published = read_nih(nih).splits
    for name in ("train_val_list.txt", "test_list.txt"):
        lines = (nih / name).read_text(encoding="utf-8").splitlines()
        (nih / name).write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    m = read_nih(nih)
    assert m.notes["split_list_lines_without_row"]["count"] == 0
    assert m.splits.tolist() == published.tolist() and set(published) == {"train", "test"}


def test_a_nih_split_list_that_is_not_utf8_is_refused_naming_its_line(nih):
    """A list saved in a Windows code page (cp1252) held a byte UTF-8 does not allow: its UnicodeDecodeError reached
    the user as an internal error. It is one line naming the list, the line and the byte."""
    p = nih / "test_list.txt"
    n = len(p.read_bytes().splitlines()) + 1
    p.write_bytes(p.read_bytes() + "caf\xe9.png\n".encode("cp1252"))
    with pytest.raises(DataError, match=rf"^{p} is not UTF-8 text: line {n} holds the byte 0xe9 .*save it as UTF-8"):
        read_nih(nih)


def test_chexpert_reads_frontal_films_unless_every_view_is_asked_for(chexpert, write_image, caplog):
    """A lateral film carries its study's labels too; by default it is left out where the table says it is lateral
    (the count on the terminal only), views="all" reads it, and views="frontal" without the column is refused."""
    import logging

    lines = (chexpert / "train.csv").read_text().splitlines()
    lateral = lines[1].replace("view1_frontal", "view2_lateral").replace(",Frontal,AP,", ",Lateral,,")
    write_image(chexpert / "train" / "patient00001" / "study1" / "view2_lateral.jpg", level=90)
    (chexpert / "train.csv").write_text("\n".join([lines[0], lateral, *lines[1:]]) + "\n")
    with caplog.at_level(logging.INFO, logger="dpmed.data.formats.chest_xray"):
        frontal = read_chexpert(chexpert)
    every = read_chexpert(chexpert, views="all")
    assert len(every) == len(frontal) + 1 and not any("lateral" in str(p) for p in frontal.paths)
    assert every.paths[0].name == "view2_lateral.jpg"
    assert frontal.where[0].startswith("train.csv line 3 ")                # the file's own line, not the kept row's
    assert "1 film(s) whose Frontal/Lateral is not Frontal left out" in caplog.text
    assert "1 film" not in frontal.description and "frontal views only (Frontal/Lateral Frontal)" in frontal.description
    assert every.notes["views"] == "every view" and frontal.notes["views"].startswith("frontal views only")
    header = lines[0].split(",")
    column = header.index("Frontal/Lateral")
    for name in ("train.csv", "valid.csv"):
        rows = [line.split(",") for line in (chexpert / name).read_text().splitlines()]
        (chexpert / name).write_text("\n".join(",".join(r[:column] + r[column + 1:]) for r in rows) + "\n")
    assert len(read_chexpert(chexpert)) == len(every) and "names none" in read_chexpert(chexpert).description
    with pytest.raises(DataError, match=r"train.csv has no 'Frontal/Lateral' column, so data.views: frontal cannot "
                                        r"tell"):
        read_chexpert(chexpert, views="frontal")


# --- MIMIC-CXR-JPG ------------------------------------------------------------------------------------------------


def test_views_all_is_told_unread_only_where_no_table_names_a_film_s_view(chexpert, load_layout):
    """views: all reads every film, as leaving it unset does where no table names the views: told as changing nothing
    then (`DataConfig.settings_the_data_turn_off`), and not while one of CheXpert's two tables names them."""
    from dpmed.config.data_section import DataConfig

    config = DataConfig.model_validate({"source": "chexpert", "path": str(chexpert), "views": "all"})

    def unread() -> list[str]:
        return [key for key, _ in config.settings_the_data_turn_off(load_layout("chexpert", chexpert, views="all"))]

    assert unread() == []
    for name in ("valid.csv", "train.csv"):
        rows = [line.split(",") for line in (chexpert / name).read_text().splitlines()]
        column = rows[0].index("Frontal/Lateral")
        (chexpert / name).write_text("\n".join(",".join(r[:column] + r[column + 1:]) for r in rows) + "\n")
        assert unread() == ([] if name == "valid.csv" else ["views"])


def test_mimic_study_labels_official_split_and_demographics(mimic, load_layout, no_patient_crosses):
    m = read_mimic(mimic, findings=("No Finding", "Enlarged Cardiomediastinum"), uncertain="ones")
    # study k writes finding j as ["1.0", "0.0", "-1.0", ""][(k + j) % 4]; -1 -> 1 (ones), blank -> 0
    expected = {0: [1, 0], 1: [0, 1], 2: [1, 0], 3: [0, 1]}
    for k, want in expected.items():
        row = [i for i, p in enumerate(m.patient_ids) if p == str(10000032 + k)]
        assert all(m.labels[r].tolist() == want for r in row)
    assert m.sex[0] == "female" and m.age[0] == 50 and m.notes["official_split"] is True
    d = load_layout("mimic", mimic)
    assert len(d.val) == 2 and len(d.test) == 3  # subject 10000042 (k = 10) has two images, both in test
    assert no_patient_crosses(d) and d.source["uncertain_policy"] == "-1 -> zeros"


def test_mimic_sex_and_age_read_as_unknown_are_told_at_their_line_of_patients_csv(mimic, write_csv):
    """Before: "1 sex value(s) not M/F/male/female were read as unknown (e.g. mimic-cxr-2.0.0-metadata.csv.gz line 2
    (dicom_id ...): 'X')", a line of a table that holds no sex: the value is in MIMIC-IV's patients.csv."""
    people = [[str(10000032 + k), "FM"[k % 2], 50 + k] for k in range(12)]
    people[1] = [people[1][0], "X", "fifty"]
    write_csv(mimic / "patients.csv.gz", ["subject_id", "gender", "anchor_age"], people, gz=True)
    m = read_mimic(mimic)
    lines = describe_demographics(m, np.arange(len(m)))
    assert lines == [
        "data: 1 age value(s) not a plausible age in years were read as unknown (e.g. patients.csv.gz line 3 "
        "(subject_id 10000033): 'fifty'); fairness by age leaves them out",
        "data: 1 sex value(s) not M/F/male/female were read as unknown (e.g. patients.csv.gz line 3 (subject_id "
        "10000033): 'X'); fairness by sex leaves them out"]


def test_mimic_age_is_the_age_at_the_exam_where_the_anchor_year_and_study_date_give_it(mimic, write_csv):
    """anchor_age is the age in the patient's anchor year; an exam years later is of an older patient, which moves
    images between the fairness age bins. Without the dates, anchor_age as given."""
    import pandas as pd

    people = pd.read_csv(mimic / "patients.csv.gz", dtype=str)
    people["anchor_year"] = "2150"
    people.to_csv(mimic / "patients.csv.gz", index=False, compression="gzip")
    meta = pd.read_csv(mimic / "mimic-cxr-2.0.0-metadata.csv.gz", dtype=str)
    meta["StudyDate"] = ["21570412" if i == 0 else "" for i in range(len(meta))]    # 7 years on; the rest unknown
    meta.to_csv(mimic / "mimic-cxr-2.0.0-metadata.csv.gz", index=False, compression="gzip")
    m = read_mimic(mimic)
    assert m.age[0] == 57 and m.age[1] == 50              # subject 10000032: anchor_age 50 in 2150


def test_mimic_without_its_split_or_patients_table_is_split_by_dpmed_and_of_unknown_sex_and_age(mimic):
    """Both tables are optional (MIMIC-IV's patients.csv is a separate download): without them no row has a
    published split, sex or age, and the notes say so."""
    (mimic / "mimic-cxr-2.0.0-split.csv.gz").unlink()
    (mimic / "patients.csv.gz").unlink()
    m = read_mimic(mimic)
    assert set(m.splits) == {""} and set(m.sex) == {"unknown"} and np.isnan(m.age).all()
    assert m.notes["official_split"] is False and m.notes["demographics"] == "none (sex and age unknown)"


def test_mimic_a_split_that_is_not_train_validate_or_test_is_flagged_at_its_line(mimic, load_layout):
    import pandas as pd

    path = mimic / "mimic-cxr-2.0.0-split.csv.gz"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[2, "split"] = "holdout"
    frame.to_csv(path, index=False, compression="gzip")
    with pytest.raises(DataError, match=r"(?s)1 of 15 rows .*\(1 unknown split\).*mimic-cxr-2.0.0-metadata.csv.gz "
                                        r"line 4 \(dicom_id 010a1b2c3-d4e5f6\): split 'holdout' is not train, "
                                        r"validate or test"):
        load_layout("mimic", mimic)


def test_mimic_study_without_labels_is_flagged(mimic, load_layout):
    import pandas as pd

    path = mimic / "mimic-cxr-2.0.0-chexpert.csv.gz"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.iloc[1:].to_csv(path, index=False, compression="gzip")
    with pytest.raises(DataError, match=r"(?s)2 of 15 rows .*\(2 missing label\).*line 2 "
                                        r"\(dicom_id 000a1b2c3-d4e5f6\): study s50414267 of subject 10000032 has no "
                                        r"row"):
        load_layout("mimic", mimic)
    with pytest.raises(DataError, match="none of mimic-cxr-2.0.0-metadata.csv.gz, mimic-cxr-2.0.0-metadata.csv"):
        read_mimic(mimic.parent)


def test_mimic_reads_pa_and_ap_films_unless_every_view_is_asked_for(mimic, load_layout):
    """ViewPosition LATERAL, LL or blank is left out by default; a flagged row keeps its line in the file."""
    import pandas as pd

    path = mimic / "mimic-cxr-2.0.0-metadata.csv.gz"
    meta = pd.read_csv(path, dtype=str, keep_default_na=False)
    meta.loc[0, "ViewPosition"], meta.loc[2, "ViewPosition"], meta.loc[3, "ViewPosition"] = "LATERAL", "", "ap"
    meta.to_csv(path, index=False, compression="gzip")
    every, frontal = read_mimic(mimic, views="all"), read_mimic(mimic)
    assert len(every) == len(meta) and len(frontal) == len(meta) - 2
    assert [str(p.name) for p in frontal.paths] == [f"{d}.jpg" for d in meta["dicom_id"][[1, *range(3, len(meta))]]]
    assert frontal.notes["views"] == "frontal views only (ViewPosition PA or AP)" and "PA or AP" in frontal.description
    assert frontal.where[0] == f"mimic-cxr-2.0.0-metadata.csv.gz line 3 (dicom_id {meta['dicom_id'][1]})"
    assert load_layout("mimic", mimic, views="all").source["views"] == "every view"
    meta["ViewPosition"] = "LL"
    meta.to_csv(path, index=False, compression="gzip")
    with pytest.raises(DataError, match=r"metadata.csv.gz: no film's ViewPosition is PA or AP .* data.views: all"):
        read_mimic(mimic)


def test_mimic_without_a_required_column(mimic, write_csv):
    write_csv(mimic / "mimic-cxr-2.0.0-metadata.csv.gz", ["dicom", "subject_id", "study_id"], [["a", "1", "2"]],
              gz=True)
    with pytest.raises(DataError, match="mimic-cxr-2.0.0-metadata.csv.gz has no column 'dicom_id'"):
        read_mimic(mimic)


def test_a_bad_value_in_chexperts_valid_csv_flags_its_own_row(chexpert):
    """valid.csv's rows follow train.csv's 16 in the manifest: its line 3 is row 17. Flagged at an offset, a train.csv
    row would be refused and the bad validation row kept with label 0."""
    text = (chexpert / "valid.csv").read_text().splitlines()
    cells = text[2].split(",")
    cells[5 + CHEXPERT_FINDINGS.index("Edema")] = "maybe"
    text[2] = ",".join(cells)
    (chexpert / "valid.csv").write_text("\n".join(text) + "\n")
    m = read_chexpert(chexpert)
    assert list(m.problems) == [17] and m.problems[17].kind == "label outside the task"
    assert m.where[17] == "valid.csv line 3 (CheXpert-v1.0-small/valid/patient64542/study1/view1_frontal.jpg)"
    assert "Edema = 'maybe' in valid.csv" in m.problems[17].detail


def test_mimic_a_study_with_two_label_rows_or_a_bad_value_is_flagged_not_read(mimic):
    """Study k = 3 listed twice in the labeller's table (which row is right?) and study k = 5 with 'maybe' for a
    chosen finding: their images are flagged, not given the first row's labels or 0."""
    import pandas as pd

    path = mimic / "mimic-cxr-2.0.0-chexpert.csv.gz"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[5, "No Finding"] = "maybe"
    pd.concat([frame, frame.iloc[[3]]]).to_csv(path, index=False, compression="gzip")
    m = read_mimic(mimic, findings=("No Finding", "Enlarged Cardiomediastinum"))
    flagged = {m.patient_ids[i]: p.kind for i, p in m.problems.items()}
    assert flagged == {"10000035": "duplicate label row", "10000037": "label outside the task"}


def test_nih_a_blank_finding_is_flagged_and_each_row_keeps_its_own_sex(nih):
    """A blank Finding Labels cell is no finding at all, not 'No Finding'. The fixture writes patient p as
    'MF'[p % 2]: each row's sex is its own patient's."""
    text = (nih / "Data_Entry_2017.csv").read_text().replace("00000002_000.png,Atelectasis", "00000002_000.png,")
    (nih / "Data_Entry_2017.csv").write_text(text)
    m = read_nih(nih)
    assert list(m.problems) == [1] and m.problems[1].kind == "label outside the task"
    assert m.sex.tolist() == ["female" if int(p) % 2 else "male" for p in m.patient_ids]


@pytest.mark.parametrize("layout", ["chexpert", "mimic"])
def test_the_study_s_uncertain_policy_reaches_the_reader(layout, request, load_layout):
    """data.uncertain: ones, given through the registry as a study gives it, is the policy the labels and the record
    carry (the readers' own tests call them directly)."""
    root = request.getfixturevalue(layout)
    default, ones = load_layout(layout, root), load_layout(layout, root, uncertain="ones")
    assert default.source["uncertain_policy"] == "-1 -> zeros" and ones.source["uncertain_policy"] == "-1 -> ones"
    labels = [np.concatenate([s.labels for s in (d.train, d.val, d.test)]) for d in (default, ones)]
    assert labels[1].shape == labels[0].shape and labels[1].sum() > labels[0].sum()   # some -1 became 1
