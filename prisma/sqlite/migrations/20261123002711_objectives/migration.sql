-- CreateTable
CREATE TABLE "Objective" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "prompt" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "model" TEXT,
    "schedule" TEXT NOT NULL,
    "overlap" TEXT NOT NULL,
    "catchupWindowMs" INTEGER NOT NULL,
    "pauseOnFailure" BOOLEAN NOT NULL,
    "paused" BOOLEAN NOT NULL DEFAULT false,
    "skipBefore" DATETIME,
    "webhookSecretRef" TEXT,
    "createdBy" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "ObjectiveRun" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "objectiveId" TEXT NOT NULL,
    "scheduledAt" DATETIME,
    "status" TEXT NOT NULL,
    "turnId" TEXT,
    "outcome" TEXT,
    "error" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "ObjectiveEvent" (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "objectiveId" TEXT NOT NULL,
    "eventId" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "payloadHash" TEXT NOT NULL,
    "runId" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateIndex
CREATE UNIQUE INDEX "Objective_name_key" ON "Objective"("name");

-- CreateIndex
CREATE INDEX "ObjectiveRun_objectiveId_createdAt_idx" ON "ObjectiveRun"("objectiveId", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "ObjectiveEvent_objectiveId_eventId_key" ON "ObjectiveEvent"("objectiveId", "eventId");
