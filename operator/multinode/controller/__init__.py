"""Thin kopf wiring: watch TrainingJobs and their pods, reconcile through the pure planner, apply."""
