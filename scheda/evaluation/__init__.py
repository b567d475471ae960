"""The measure of a representation: classifiers on the encoded splits, fine-tuning, exports."""
