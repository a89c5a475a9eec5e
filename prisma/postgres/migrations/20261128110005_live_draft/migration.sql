-- CreateTable
CREATE TABLE "LiveDraft" (
    "sessionId" TEXT NOT NULL,
    "turnId" TEXT NOT NULL,
    "stepKey" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "LiveDraft_pkey" PRIMARY KEY ("sessionId")
);
